"""A plan-quality gate for users' own models: plan (or read the committed plan of) each workload,
compare step, bottleneck, memory headroom and validity with a committed baseline, say why a
check fails, and find committed plans gone stale. Deterministic: predicted costs, pinned model."""
