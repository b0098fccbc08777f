import sys

from fakegpu.cli import main

sys.exit(main())
