"""One module per subcommand, each exposing ``run(args: argparse.Namespace) -> int``.

They are imported only when their subcommand runs, so ``ddptui --help`` stays fast.
"""
