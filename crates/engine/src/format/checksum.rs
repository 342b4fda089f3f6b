//! CRC32C, and the rule for checksumming a structure that contains its own checksum.

/// CRC32C (Castagnoli) of `data`.
#[must_use]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// CRC32C of `data` as if the four bytes at `field` were zero.
///
/// Every self-checksummed structure stores its CRC inside the bytes it covers;
/// this is the one definition of how that works.
#[must_use]
pub fn crc32c_without_field(data: &[u8], field: usize) -> u32 {
    let crc = crc32c::crc32c(&data[..field]);
    let crc = crc32c::crc32c_append(crc, &[0; 4]);
    crc32c::crc32c_append(crc, &data[field + 4..])
}

/// Stores the checksum of `data` in the four bytes at `field`.
pub fn seal(data: &mut [u8], field: usize) {
    let crc = crc32c_without_field(data, field);
    data[field..field + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Whether the checksum stored at `field` matches `data`.
#[must_use]
pub fn verify(data: &[u8], field: usize) -> bool {
    if data.len() < field + 4 {
        return false;
    }
    let stored = u32::from_le_bytes([data[field], data[field + 1], data[field + 2], data[field + 3]]);
    stored == crc32c_without_field(data, field)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        // RFC 3720 B.4: 32 bytes of zeros.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
    }

    #[test]
    fn sealed_data_verifies_and_any_flip_is_caught() {
        let mut data = vec![0x5Au8; 64];
        seal(&mut data, 8);
        assert!(verify(&data, 8));
        for bit in 0..data.len() * 8 {
            let mut d = data.clone();
            d[bit / 8] ^= 1 << (bit % 8);
            assert!(!verify(&d, 8), "flip of bit {bit} went unnoticed");
        }
    }
}
