//! What an unknown machine's discovery reports met (module `discover`
//! runs them; `machine` carries them in each machine's outcome).

/// A machine in no node: who it is, and what its reports met.
#[derive(Debug, Clone, Default)]
pub struct Reports {
    /// The MAC it boots from (`aa:bb:…`), and its SMBIOS UUID.
    pub mac: String,
    pub uuid: String,
    /// Reports answered 429 (too many at once), 403 (not from the
    /// address leased to its MAC), and anything else but 200 (another
    /// status, or no answer).
    pub too_many: u32,
    pub not_its_lease: u32,
    pub other: u32,
}
