pub mod assignor;
pub mod protocol;
