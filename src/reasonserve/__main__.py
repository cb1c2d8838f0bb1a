"""``python -m reasonserve`` runs the command line interface."""

from reasonserve.cli import main

raise SystemExit(main())
