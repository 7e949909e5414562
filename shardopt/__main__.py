from shardopt.cli import main

main()
