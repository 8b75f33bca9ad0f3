"""mixft: fine-tune Hugging Face models with automatic mixed precision, in a loop you can read."""

__version__ = "0.1.0"
