import sys

from ddptui.run.supervisor.process import main

sys.exit(main())
