"""`python cli.py ...` from a clone does what the installed `tracehouse ...` does: the CLI is tracehouse.cli
(tracehouse.launch first hands a plain `sql` to a warm query server)."""

if __name__ == "__main__":
    from tracehouse.launch import entry

    entry()
else:
    from tracehouse.cli import entry, main  # noqa: F401 - main: what `from cli import main` finds
