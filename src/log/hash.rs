//! The crate's one FNV-1a (64-bit). Its outputs reach disk: the ids a v1 session's
//! entries get when it is migrated ([`super::migrate::v1_id`]), and the seed of the
//! projection's span digests. Changing a byte here changes those ids and makes every
//! stored watermark disagree, so the tests below pin its values.

/// FNV-1a's offset basis (64-bit).
pub(crate) const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a's prime (64-bit).
const FNV_PRIME: u64 = 0x0100_0000_01b3;

/// FNV-1a over a sequence of byte slices, as if they were one (a line's content, possibly
/// in pieces).
pub(crate) fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h = FNV_OFFSET;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(FNV_PRIME);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_is_the_published_function_and_pieces_hash_as_their_concatenation() {
        // The published test vectors of 64-bit FNV-1a.
        assert_eq!(fnv1a(&[b""]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(&[]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(&[b"foobar"]), 0x8594_4171_f739_67e8);
        let line: &[u8] = br#"{"type":"custom","id":"x"}"#;
        assert_eq!(fnv1a(&[line]), 0x3c9f_431e_8f1e_8cfd);
        assert_eq!(fnv1a(&[&line[..8], &line[8..]]), fnv1a(&[line]));
    }
}
