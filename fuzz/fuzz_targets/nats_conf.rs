//! Fuzz target: `mesh::fuzzing::nats_conf` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mesh::fuzzing::nats_conf(data));
