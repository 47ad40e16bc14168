"""`python cli.py ...` from a clone does what the installed `tracehouse ...` does: the CLI is tracehouse.cli."""

from tracehouse.cli import main

if __name__ == "__main__":
    main()
