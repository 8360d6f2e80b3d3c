import sys

from trainstack.demo.run import main

sys.exit(main())
