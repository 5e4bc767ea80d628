//! Fuzz target: every tool's arguments (the `mesh` binary's modules and decide's) on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mesh::fuzzing::tool_arguments(data);
    mesh_decide::fuzzing::tool_arguments(data);
});
