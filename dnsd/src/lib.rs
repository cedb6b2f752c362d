pub mod core;
pub mod text;
pub mod wire;
pub mod zone;
