//! Compiles `cuda/cuzk.cu` against sppark's headers when nvcc is available; otherwise
//! builds the CPU-only crate and says so. Never fails for lack of a GPU toolchain.
//!
//! Environment: `NVCC` (compiler; default `nvcc` on PATH, found by sppark's build),
//! `CUZK_CUDA_ARCHS` (comma-separated SASS targets, default `sm_80,sm_90`: Ampere and
//! Hopper; PTX of the last one is embedded too, so newer GPUs JIT-compile it).

use std::env;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(cuzk_cuda)");
    println!("cargo:rerun-if-changed=cuda");
    println!("cargo:rerun-if-env-changed=CUZK_CUDA_ARCHS");
    println!("cargo:rerun-if-env-changed=NVCC");
    if env::var("DEP_SPPARK_TARGET").as_deref() != Ok("cuda") {
        println!(
            "cargo:warning=cuzk-gpu: nvcc not found (set NVCC or put it on PATH): building without the CUDA backend; \
             the CPU backend will be used"
        );
        return;
    }
    // sppark::build::ccmd() would also add sm_70/75, compute_100 and sm_120 code: not
    // needed here and it doubles the compile time and the binary, so the command is
    // assembled with the same defines and include paths, and our own targets.
    let mut nvcc = cc::Build::new();
    nvcc.cuda(true);
    // Never `-G`: cc adds it whenever the profile has debug info (our release profile
    // keeps line tables), and device code built with `-G` is unoptimized and breaks
    // sppark's warp-synchronous sort: on an H200 the MSM's cooperative `sort` kernel
    // hung in `grid.sync()` (seen with cuda-gdb, 2026-11-29). `-lineinfo` keeps
    // source lines for profilers without changing the code.
    nvcc.debug(false);
    nvcc.flag("-lineinfo");
    nvcc.define("TAKE_RESPONSIBILITY_FOR_ERROR_MESSAGE", None);
    nvcc.define("FEATURE_BLS12_381", None);
    for dep in ["DEP_BLST_C_SRC", "DEP_SPPARK_ROOT"] {
        let dir = env::var_os(dep)
            .unwrap_or_else(|| panic!("{dep} is not set (blst and sppark must be direct dependencies)"));
        nvcc.include(dir);
    }
    nvcc.flag("-Xcompiler").flag("-Wno-unused-function").flag("-t0");
    let archs = env::var("CUZK_CUDA_ARCHS").unwrap_or_else(|_| "sm_80,sm_90".into());
    let nums: Vec<&str> = archs
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(|a| a.strip_prefix("sm_").unwrap_or_else(|| panic!("CUZK_CUDA_ARCHS: `{a}` is not of the form sm_NN")))
        .collect();
    assert!(!nums.is_empty(), "CUZK_CUDA_ARCHS is empty");
    for num in &nums {
        nvcc.flag("-gencode").flag(format!("arch=compute_{num},code=sm_{num}"));
    }
    let last = nums[nums.len() - 1];
    nvcc.flag("-gencode").flag(format!("arch=compute_{last},code=compute_{last}"));
    // Must match how blst was compiled, or the host-side field arithmetic the MSM
    // uses will not link (blst builds its ADX code paths when the build host has ADX).
    #[cfg(target_arch = "x86_64")]
    if env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64") && std::is_x86_feature_detected!("adx") {
        nvcc.define("__ADX__", None);
    }
    nvcc.file("cuda/cuzk.cu").compile("cuzk_cuda");
    println!("cargo:rustc-cfg=cuzk_cuda");
}
