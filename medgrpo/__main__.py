import sys

from medgrpo.cli import main

sys.exit(main())
