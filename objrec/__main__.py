import sys

from objrec.cli import main

sys.exit(main())
