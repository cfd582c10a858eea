"""Code generators: Stripe -> LLVM IR (CPU) and Stripe -> OpenCL C / CUDA C (GPU).

Entry points: :func:`.llvm.generate`, :func:`.opencl.generate_opencl`,
:func:`.cuda.generate_cuda`; the runtimes' contracts are :mod:`.cpu_abi` and
:mod:`.gpu_abi`.  :mod:`.plan` holds the decisions every generator shares;
``llvm_*`` modules are the CPU generator, ``cstyle*`` / ``gpu_*`` and the two
dialects the GPU one.  Keep the modules in this one folder: the kernel cache
fingerprints ``codegen/*.py``.
"""
