//! Cloud image IDs per provider, region, version and arch: what the
//! controller needs to create a Power VS (or Alibaba, AWS) machine from the
//! same release the bare-metal nodes boot.
//!
//! Sources, merged: the `images` section of every stream document kept in
//! the cache (one per fetched version, so the mapping grows with each
//! fetch), and operator-written files in the shape of Gardener's
//! `CloudProfileConfig` (`machineImages[].versions[].regions[].{name,id}`),
//! for private or customized images. The same shape is what [`CloudCatalog::to_cloud_profile_config`] writes.
//!
//! What an ID is per provider: an image ID for AWS and Alibaba (`ami-…`,
//! `m-…`); for Power VS and IBM Cloud, the object in the region's bucket
//! that the installer imports as the boot image (`bucket`, `url` are kept);
//! for GCP, `projects/<project>/global/images/<name>` (region `global`).

use crate::cache::{Cache, STREAM_DOC};
use crate::stream::{Replicated, Stream};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CloudImage {
    pub provider: String,
    /// The image's name: the stream for images from stream metadata.
    pub name: String,
    pub version: String,
    pub region: String,
    /// Normalized: x86_64, aarch64, ppc64le, s390x.
    pub arch: String,
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bucket: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct CloudCatalog {
    pub images: Vec<CloudImage>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CloudError {
    #[error("no {provider} image for version {version} ({arch}) in region {region}{known}")]
    NotFound {
        provider: String,
        region: String,
        version: String,
        arch: String,
        known: String,
    },
    #[error("{file}: {msg}")]
    Config { file: String, msg: String },
}

/// Gardener's `CloudProfileConfig` (only what maps images).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CloudProfileConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub machine_images: Vec<MachineImage>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MachineImage {
    pub name: String,
    #[serde(default)]
    pub versions: Vec<MachineImageVersion>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MachineImageVersion {
    pub version: String,
    #[serde(default)]
    pub regions: Vec<RegionIdMapping>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegionIdMapping {
    pub name: String,
    pub id: String,
    /// Gardener spells it `amd64`/`arm64`; absent means amd64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
}

/// x86_64/amd64 → x86_64, aarch64/arm64 → aarch64, ppc64le/ppc64el → ppc64le.
pub fn normalize_arch(a: &str) -> String {
    match site::Arch::parse(a) {
        Some(x) => x.as_str().to_string(),
        None => a.to_string(),
    }
}

fn gardener_arch(a: &str) -> &str {
    match a {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

impl CloudCatalog {
    /// The cloud images a stream document lists, for every arch.
    pub fn from_stream(doc: &Stream) -> CloudCatalog {
        let mut images = Vec::new();
        for (arch, a) in &doc.architectures {
            let arch = normalize_arch(arch);
            let mut push = |provider: &str,
                            region: &str,
                            version: &str,
                            id: &str,
                            bucket: Option<&str>,
                            url: Option<&str>| {
                images.push(CloudImage {
                    provider: provider.to_string(),
                    name: doc.stream.clone(),
                    version: version.to_string(),
                    region: region.to_string(),
                    arch: arch.clone(),
                    id: id.to_string(),
                    bucket: bucket.map(str::to_string),
                    url: url.filter(|u| !u.is_empty()).map(str::to_string),
                })
            };
            let i = &a.images;
            for (provider, r) in [("aws", &i.aws), ("aliyun", &i.aliyun)] {
                for (region, img) in r.iter().flat_map(|r: &Replicated<_>| r.regions.iter()) {
                    push(provider, region, &img.release, &img.image, None, None);
                }
            }
            for (provider, r) in [("powervs", &i.powervs), ("ibmcloud", &i.ibmcloud)] {
                for (region, o) in r.iter().flat_map(|r| r.regions.iter()) {
                    push(
                        provider,
                        region,
                        &o.release,
                        &o.object,
                        Some(&o.bucket),
                        Some(&o.url),
                    );
                }
            }
            if let Some(g) = &i.gcp {
                push(
                    "gcp",
                    "global",
                    &g.release,
                    &format!("projects/{}/global/images/{}", g.project, g.name),
                    None,
                    None,
                );
            }
        }
        CloudCatalog { images }
    }

    /// Everything the cache's stream documents list.
    pub fn from_cache(cache: &Cache) -> std::io::Result<CloudCatalog> {
        let mut out = CloudCatalog::default();
        let Ok(streams) = std::fs::read_dir(&cache.root) else {
            return Ok(out);
        };
        for s in streams {
            let s = s?;
            let Ok(versions) = std::fs::read_dir(s.path()) else {
                continue;
            };
            for v in versions {
                let doc = v?.path().join(STREAM_DOC);
                if let Ok(bytes) = std::fs::read(&doc) {
                    match Stream::parse(&bytes) {
                        Ok(d) => out.merge(CloudCatalog::from_stream(&d)),
                        Err(e) => {
                            tracing::warn!(file = %doc.display(), error = %e, "unreadable stream document skipped")
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Adds the images of a Gardener-style `CloudProfileConfig` for `provider`.
    pub fn merge_cloud_profile_config(
        &mut self,
        provider: &str,
        file: &Path,
    ) -> Result<(), CloudError> {
        let err = |msg: String| CloudError::Config {
            file: file.display().to_string(),
            msg,
        };
        let text = std::fs::read_to_string(file).map_err(|e| err(e.to_string()))?;
        let cfg: CloudProfileConfig =
            serde_yaml_ng::from_str(&text).map_err(|e| err(e.to_string()))?;
        let mut add = CloudCatalog::default();
        for mi in &cfg.machine_images {
            for v in &mi.versions {
                for r in &v.regions {
                    add.images.push(CloudImage {
                        provider: provider.to_string(),
                        name: mi.name.clone(),
                        version: v.version.clone(),
                        region: r.name.clone(),
                        arch: normalize_arch(r.architecture.as_deref().unwrap_or("amd64")),
                        id: r.id.clone(),
                        bucket: None,
                        url: None,
                    });
                }
            }
        }
        self.merge(add);
        Ok(())
    }

    /// Later entries win over earlier ones for the same provider, region,
    /// version and arch (an operator's file over the stream's).
    pub fn merge(&mut self, other: CloudCatalog) {
        for img in other.images {
            self.images.retain(|i| {
                !(i.provider == img.provider
                    && i.region == img.region
                    && i.version == img.version
                    && i.arch == img.arch)
            });
            self.images.push(img);
        }
    }

    /// The image to create a `provider` machine from in `region`.
    pub fn image_id(
        &self,
        provider: &str,
        region: &str,
        version: &str,
        arch: &str,
    ) -> Result<&CloudImage, CloudError> {
        let arch = normalize_arch(arch);
        if let Some(i) = self.images.iter().find(|i| {
            i.provider == provider && i.region == region && i.version == version && i.arch == arch
        }) {
            return Ok(i);
        }
        let regions: Vec<&str> = self
            .images
            .iter()
            .filter(|i| i.provider == provider && i.version == version && i.arch == arch)
            .map(|i| i.region.as_str())
            .collect();
        let known = if regions.is_empty() {
            let versions: std::collections::BTreeSet<&str> = self
                .images
                .iter()
                .filter(|i| i.provider == provider && i.arch == arch)
                .map(|i| i.version.as_str())
                .collect();
            if versions.is_empty() {
                String::new()
            } else {
                format!(
                    "; known versions: {}",
                    versions.into_iter().collect::<Vec<_>>().join(", ")
                )
            }
        } else {
            format!("; that version is in: {}", regions.join(", "))
        };
        Err(CloudError::NotFound {
            provider: provider.into(),
            region: region.into(),
            version: version.into(),
            arch,
            known,
        })
    }

    /// The mapping for one provider as a Gardener `CloudProfileConfig`.
    pub fn to_cloud_profile_config(&self, provider: &str, api_version: &str) -> CloudProfileConfig {
        let mut machine_images: Vec<MachineImage> = Vec::new();
        let mut mine: Vec<&CloudImage> = self
            .images
            .iter()
            .filter(|i| i.provider == provider)
            .collect();
        mine.sort_by(|a, b| {
            (&a.name, &a.version, &a.region, &a.arch)
                .cmp(&(&b.name, &b.version, &b.region, &b.arch))
        });
        for i in mine {
            if machine_images.last().is_none_or(|m| m.name != i.name) {
                machine_images.push(MachineImage {
                    name: i.name.clone(),
                    versions: Vec::new(),
                });
            }
            let mi = machine_images.last_mut().expect("pushed above");
            if mi.versions.last().is_none_or(|v| v.version != i.version) {
                mi.versions.push(MachineImageVersion {
                    version: i.version.clone(),
                    regions: Vec::new(),
                });
            }
            let v = mi.versions.last_mut().expect("pushed above");
            v.regions.push(RegionIdMapping {
                name: i.region.clone(),
                id: i.id.clone(),
                architecture: Some(gardener_arch(&i.arch).to_string()),
            });
        }
        CloudProfileConfig {
            api_version: Some(api_version.to_string()),
            kind: Some("CloudProfileConfig".into()),
            machine_images,
        }
    }
}
