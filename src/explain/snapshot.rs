//! PyTorch's memory snapshot (`torch.cuda.memory._snapshot()`), read as a stream.
