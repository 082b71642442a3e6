#!/usr/bin/env python3
"""Dry run of check_hopper_dev.py on a machine without a GPU, with the fakes of dry_run_fakes.py
(PyTorch for the CPU, the CUDA pieces faked, the libraries through the real libfusetune_capi.so
on its CPU backend). Checks the control flow, the C API calls and the CSV, not the kernels.

Usage: /usr/bin/python3 ci/device/check_hopper_dev_dry_run.py --lib build/kernels/capi/libfusetune_capi.so \\
         --variant again=build/kernels/capi/libfusetune_capi.so --config 'fused/bm64/bs64/t2/{p}/st1' \\
         --small --problems 3 --out /tmp/check-dry"""
import sys

import torch

import dry_run_fakes

dry_run_fakes.install()
torch.cuda.is_available = lambda: True
ct = dry_run_fakes.load("compare_torch")
dry_run_fakes.use_cpu_library(ct)
check = dry_run_fakes.load("check_hopper_dev")
check.DEVICE = "cpu"
sys.exit(check.main())
