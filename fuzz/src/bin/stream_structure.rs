//! afl++ target `stream_structure`: [`dualfs_sim::stream_structure::structure_target`] over each input, in
//! afl's persistent mode (libAFLDriver calls this function).
#![no_main]

/// The libFuzzer entry point libAFLDriver calls with each input.
///
/// # Safety
/// `data` points at `size` readable bytes (afl's input buffer).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn LLVMFuzzerTestOneInput(data: *const u8, size: usize) -> i32 {
    let bytes = if size == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(data, size) } };
    dualfs_sim::stream_structure::structure_target(bytes);
    0
}
