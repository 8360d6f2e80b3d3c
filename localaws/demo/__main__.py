import sys

from localaws.demo.run import main

sys.exit(main())
