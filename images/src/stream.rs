//! CoreOS stream metadata: the JSON that Fedora CoreOS publishes per stream
//! and that openshift-install embeds for RHCOS (`coreos/rhcos.json`).
//!
//! ```text
//! stream, metadata.last-modified
//! architectures.<arch>.artifacts.<platform>.release
//! architectures.<arch>.artifacts.<platform>.formats.<format>.{disk,kernel,initramfs,rootfs}
//!     .{location, signature, sha256, uncompressed-sha256}
//! architectures.<arch>.images.{aws,aliyun}.regions.<region>.{release,image}
//! architectures.<arch>.images.{powervs,ibmcloud}.regions.<region>.{release,object,bucket,url}
//! architectures.<arch>.images.gcp.{release,project,family,name}
//! ```
//! Unknown keys are ignored on purpose: this is a document we read, not a
//! configuration we own, and upstream adds keys (`rhel-coreos-extensions`,
//! `kubevirt`, ...) without notice.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stream {
    pub stream: String,
    #[serde(default)]
    pub metadata: Metadata,
    pub architectures: BTreeMap<String, ArchEntry>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    #[serde(rename = "last-modified", default)]
    pub last_modified: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchEntry {
    #[serde(default)]
    pub artifacts: BTreeMap<String, PlatformArtifacts>,
    #[serde(default)]
    pub images: CloudImages,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlatformArtifacts {
    pub release: String,
    #[serde(default)]
    pub formats: BTreeMap<String, Format>,
}

/// One format of a platform: a disk image, or the PXE triple.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Format {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<Artifact>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<Artifact>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initramfs: Option<Artifact>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<Artifact>,
}

impl Format {
    /// (role, artifact) for each artifact present, in a stable order.
    pub fn artifacts(&self) -> Vec<(&'static str, &Artifact)> {
        [
            ("kernel", &self.kernel),
            ("initramfs", &self.initramfs),
            ("rootfs", &self.rootfs),
            ("disk", &self.disk),
        ]
        .into_iter()
        .filter_map(|(role, a)| a.as_ref().map(|a| (role, a)))
        .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    pub location: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    pub sha256: String,
    #[serde(
        rename = "uncompressed-sha256",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub uncompressed_sha256: Option<String>,
}

impl Artifact {
    /// The file name: the last path segment of `location`, without query.
    pub fn file_name(&self) -> &str {
        let path = self.location.split(['?', '#']).next().unwrap_or("");
        path.rsplit('/').next().unwrap_or("")
    }
}

/// `architectures.<arch>.images`: cloud images of the stream's current release.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloudImages {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aws: Option<Replicated<RegionImage>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aliyun: Option<Replicated<RegionImage>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub powervs: Option<Replicated<RegionObject>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ibmcloud: Option<Replicated<RegionObject>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gcp: Option<GcpImage>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound(deserialize = "T: Deserialize<'de>"))]
pub struct Replicated<T> {
    #[serde(default)]
    pub regions: BTreeMap<String, T>,
}

/// An image ID in one region of an AWS-like cloud (AWS AMI, Alibaba image).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionImage {
    pub release: String,
    pub image: String,
}

/// An object in one region's bucket (Power VS, IBM Cloud): the installer
/// imports it as the boot image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionObject {
    pub release: String,
    pub object: String,
    pub bucket: String,
    #[serde(default)]
    pub url: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcpImage {
    pub release: String,
    pub project: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    pub name: String,
}

#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("not CoreOS stream metadata: {0}")]
    Parse(#[from] serde_json::Error),
    #[error("stream {stream}: no architecture {arch} (has {have})")]
    NoArch {
        stream: String,
        arch: String,
        have: String,
    },
    #[error("stream {stream} {arch}: no platform {platform} (has {have})")]
    NoPlatform {
        stream: String,
        arch: String,
        platform: String,
        have: String,
    },
    #[error("stream {stream} {arch} {platform}: no format {format} (has {have})")]
    NoFormat {
        stream: String,
        arch: String,
        platform: String,
        format: String,
        have: String,
    },
    #[error("stream {stream} {arch} {platform} {format}: {why}")]
    BadArtifact {
        stream: String,
        arch: String,
        platform: String,
        format: String,
        why: String,
    },
}

impl Stream {
    pub fn parse(bytes: &[u8]) -> Result<Stream, StreamError> {
        Ok(serde_json::from_slice(bytes)?)
    }

    pub fn arch(&self, arch: &str) -> Result<&ArchEntry, StreamError> {
        self.architectures
            .get(arch)
            .ok_or_else(|| StreamError::NoArch {
                stream: self.stream.clone(),
                arch: arch.to_string(),
                have: keys(&self.architectures),
            })
    }

    pub fn platform(&self, arch: &str, platform: &str) -> Result<&PlatformArtifacts, StreamError> {
        let a = self.arch(arch)?;
        a.artifacts
            .get(platform)
            .ok_or_else(|| StreamError::NoPlatform {
                stream: self.stream.clone(),
                arch: arch.to_string(),
                platform: platform.to_string(),
                have: keys(&a.artifacts),
            })
    }

    /// The artifacts of `formats` for one arch and platform, checked: every
    /// file name is a plain name and every sha256 is 64 hex digits.
    pub fn select(
        &self,
        arch: &str,
        platform: &str,
        formats: &[String],
    ) -> Result<Vec<Selected>, StreamError> {
        let p = self.platform(arch, platform)?;
        let mut out = Vec::new();
        for format in formats {
            let f = p.formats.get(format).ok_or_else(|| StreamError::NoFormat {
                stream: self.stream.clone(),
                arch: arch.to_string(),
                platform: platform.to_string(),
                format: format.clone(),
                have: keys(&p.formats),
            })?;
            for (role, a) in f.artifacts() {
                let bad = |why: String| StreamError::BadArtifact {
                    stream: self.stream.clone(),
                    arch: arch.to_string(),
                    platform: platform.to_string(),
                    format: format.clone(),
                    why,
                };
                if !site::catalog::is_component(a.file_name()) {
                    return Err(bad(format!(
                        "{role} location {:?} does not end in a plain file name",
                        a.location
                    )));
                }
                if !is_sha256(&a.sha256) {
                    return Err(bad(format!(
                        "{role} sha256 {:?} is not 64 hex digits",
                        a.sha256
                    )));
                }
                out.push(Selected {
                    role,
                    format: format.clone(),
                    artifact: a.clone(),
                });
            }
        }
        Ok(out)
    }
}

/// One artifact picked for download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selected {
    pub role: &'static str,
    pub format: String,
    pub artifact: Artifact,
}

pub fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn keys<V>(m: &BTreeMap<String, V>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.keys().cloned().collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_name_is_the_last_segment() {
        let a = Artifact {
            location: "https://h/p/x-live-kernel-x86_64?sig=1".into(),
            signature: None,
            sha256: String::new(),
            uncompressed_sha256: None,
        };
        assert_eq!(a.file_name(), "x-live-kernel-x86_64");
    }

    #[test]
    fn unsafe_names_are_refused() {
        let doc = br#"{"stream":"s","architectures":{"x86_64":{"artifacts":{"metal":{"release":"1","formats":{"pxe":{
            "kernel":{"location":"http://h/..","sha256":"0000000000000000000000000000000000000000000000000000000000000000"}}}}}}}}"#;
        let s = Stream::parse(doc).unwrap();
        let e = s
            .select("x86_64", "metal", &["pxe".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("plain file name"), "{e}");
        let e = s
            .select("x86_64", "metal", &["iso".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("no format iso (has pxe)"), "{e}");
        let e = s
            .select("s390x", "metal", &["pxe".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("no architecture s390x (has x86_64)"), "{e}");
    }
}
