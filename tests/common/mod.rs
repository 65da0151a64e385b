#![allow(dead_code)]

pub mod examples;
pub mod pi;
pub mod reference;
