# The kernel sources compiled by both nvcc (kernels/cuda) and hipcc (kernels/hip), listed once:
# a kernel file added to one backend's build is in the other's too, and
# hip_cuda_shared_instances_test checks that both builds register the same fused instances.
set(_fusetune_kernels_dir ${CMAKE_CURRENT_LIST_DIR}/..)
# Partial and materialized baselines (kernels/cuda).
set(FUSETUNE_GPU_SHARED_BASELINE_SOURCES
  ${_fusetune_kernels_dir}/cuda/softmax_rows.cu
  ${_fusetune_kernels_dir}/cuda/partial_scores.cu)
# The fused kernel's SIMT families (exact fp32; fp32, fp16 and bf16 storage), kernels/cuda/fused.
set(FUSETUNE_GPU_SHARED_FUSED_SOURCES
  ${_fusetune_kernels_dir}/cuda/fused/fused_simt_fp32.cu
  ${_fusetune_kernels_dir}/cuda/fused/fused_simt_half.cu)
# Host code shared the same way: the fused instance lookup and API checks, the GEMM grouping.
set(FUSETUNE_GPU_SHARED_HOST_SOURCES
  ${_fusetune_kernels_dir}/cuda/fused/fused_dispatch.cc
  ${_fusetune_kernels_dir}/cuda/baseline_plan.cc)
# Headers the shared kernels include (dependencies of the hipcc custom commands).
file(GLOB FUSETUNE_GPU_SHARED_HEADERS CONFIGURE_DEPENDS
  ${_fusetune_kernels_dir}/gpu/*.h
  ${_fusetune_kernels_dir}/cuda/*.cuh ${_fusetune_kernels_dir}/cuda/*.h
  ${_fusetune_kernels_dir}/cuda/fused/*.cuh ${_fusetune_kernels_dir}/cuda/fused/*.h)
