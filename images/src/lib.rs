//! images: the OS image catalog and cache.
//!
//! Not built yet: this crate is a placeholder until its issue ("[6 of 7] images").
//! Until then the site description names local kernel/initramfs/rootfs paths.
