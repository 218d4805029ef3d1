"""The real backend's measurements on torch (imported only where torch and GPUs are): the burn
(burn), copy bandwidth (copy), a timed all-reduce (collective), the memory test (memtest, with its
Triton kernels in memtestkernels) and the training check's model and loop in a rank process
(train). The folder's name is the library's: `import torch` in these modules is the library
(absolute imports), never this folder."""
