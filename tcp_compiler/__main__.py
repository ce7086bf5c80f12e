import sys

from tcp_compiler.cli import main

sys.exit(main())
