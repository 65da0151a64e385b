#![allow(dead_code)]

pub mod pi;
pub mod reference;
