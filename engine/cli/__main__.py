"""`python -m engine.cli` is `swjob`."""

from engine.cli.main import main

raise SystemExit(main())
