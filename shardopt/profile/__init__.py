"""Profile: measure embedding lookups (FBGEMM TBE or a torch-native kernel) and all-to-all."""
