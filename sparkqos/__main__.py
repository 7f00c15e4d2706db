import sys

from sparkqos.cli import main

sys.exit(main())
