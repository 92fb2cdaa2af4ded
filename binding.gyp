{
  "targets": [
    {
      "target_name": "svc_tensor",
      "sources": [
        "native/addon.cc",
        "native/alloc.cc",
        "native/gemm.cc",
        "native/gpu.cc",
        "native/kernels.cc",
        "native/kernels_scalar.cc",
        "native/kernels_avx2.cc",
        "native/kernels_avx512.cc",
        "native/linalg.cc",
        "native/linalg_simd.cc",
        "native/napi_util.cc",
        "native/pred.cc",
        "native/pred_block.cc",
        "native/pred_int.cc",
        "native/pred_lossless.cc",
        "native/pred_rans.cc",
        "native/pred_stream.cc",
        "native/rank_probe.cc",
        "native/svd.cc",
        "native/threads.cc",
        "native/tt.cc",
        "native/tt_dot.cc",
        "native/device_none.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags!": ["-fno-exceptions", "-O2", "-O3"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti", "-std=gnu++14", "-std=gnu++17", "-std=c++14", "-O2"],
      "cflags_cc": ["-std=c++17", "-O3", "-ffp-contract=fast", "-fopenmp-simd", "-fexceptions", "-Wno-psabi", "-Wno-unknown-pragmas"],
      "ldflags": ["-pthread"],
      "xcode_settings": {
        "GCC_ENABLE_CPP_EXCEPTIONS": "YES",
        "CLANG_CXX_LANGUAGE_STANDARD": "c++17",
        "OTHER_CPLUSPLUSFLAGS": ["-O3", "-ffp-contract=fast"]
      },
      "msvs_settings": { "VCCLCompilerTool": { "ExceptionHandling": 1 } }
    }
  ]
}
