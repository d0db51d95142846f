"""`python -m privfair_cli.tools.audit` (`make audit`): privfair_cli.tools.audit.cli.main."""

import sys

from privfair_cli.tools.audit.cli import main

sys.exit(main())
