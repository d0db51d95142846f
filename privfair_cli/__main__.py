import sys

from privfair_cli.main import main

sys.exit(main())
