//! The out-of-memory post-mortem: PyTorch's message parsed into fields and classified.
