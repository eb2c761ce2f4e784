"""`python -m sweep [group=option ...] [key=value ...]` - see `python -m sweep --help`."""
from .cli import main

if __name__ == "__main__":
    main()
