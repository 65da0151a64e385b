//! The persistence seam (SPEC §8).
