"""The GPU machinery the CuPy twins (``fast/cupy/``) stand on, none of it a twin itself:

    cublas.py       the GPU's ``xp.matmul`` with the tier on: cuBLAS's C API called itself
    cublaslt.py     cuBLASLt's products with a bias epilogue (the Linear twin's)
    cuda_source.py  the CUDA C sources (``fast/cuda/*.cu``), their build, shared launches
    namespace.py    the lean CuPy namespace (CuPy's own functions, a small array-API shim)
    cuda_graph.py   ``GraphedSteps``: a whole training step captured as a CUDA graph

Each imports without CuPy (the C libraries and CuPy are loaded on first use).
"""
