// The CPU backend is being written (kernels-cpu); this file lands with it.
