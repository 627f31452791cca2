# `make demo` builds the target moescope_demo: only what scripts/demo.sh runs (the CLI, both
# capture shims, the viewer, moe_train, and the torch capture library the recorded torchrun
# launcher loads), not the tests and benchmarks, so a first demo from a fresh clone is quick.
add_custom_target(moescope_demo)
foreach(target moescope moescope_inject moescope_inject_no_nccl moescope-view moe_train
               moescope_torch_capture)
  if(TARGET ${target})
    add_dependencies(moescope_demo ${target})
  endif()
endforeach()
