import sys

from ddptui.cli import main

sys.exit(main())
