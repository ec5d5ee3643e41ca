from kvplan.cli import main

raise SystemExit(main())
