//! `[mask]`: public-ID masking keys (FF1 over AES, `clients/vectors/MASK.md`). Taken by the
//! HTTP ID API, which answers `?format=masked` with them.
//!
//! Keys are secrets, never settings: the keyring comes from the file `mask_keys_file` names or
//! from the environment variable [`MASK_KEYS_ENV`] (`IDGEN_MASK_KEYS`), not from a flag value
//! or the TOML file, and `--check-config` prints the file's path and the key IDs, never a key.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use idgen_id::mask::Keyring;
use serde::{Deserialize, Serialize};

use super::{err, ConfigError};

/// The environment variable that may hold the keyring instead of `mask_keys_file`.
pub const MASK_KEYS_ENV: &str = idgen_id::mask::ENV_VAR;

settings! {
    /// The `[mask]` settings as given: flags, `IDGEN_*` variables, the file's `[mask]`.
    #[derive(Args, Deserialize, Debug, Default, Clone)]
    #[serde(default, deny_unknown_fields)]
    #[command(next_help_heading = "Public-ID masking ([mask] in the file)")]
    pub struct MaskArgs {
        /// File holding the masking keyring (`<key id>:<hex key>` entries, the current key
        /// first; clients/vectors/MASK.md); or set IDGEN_MASK_KEYS to the keyring instead
        /// [default: none: masking off].
        #[arg(long, env = "IDGEN_MASK_KEYS_FILE")]
        pub mask_keys_file: Option<PathBuf>,
    }
}

/// The `[mask]` section, resolved: the keyring read and checked.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MaskSection {
    /// Where the keyring came from, if a file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mask_keys_file: Option<PathBuf>,
    /// The keyring: `None` when masking is off. Never written.
    #[serde(skip)]
    pub keys: Option<Arc<Keyring>>,
    /// The keyring came from `IDGEN_MASK_KEYS`.
    #[serde(skip)]
    pub from_env: bool,
}

impl PartialEq for MaskSection {
    /// Same source and same key IDs (keys are not compared: a section never shows them).
    fn eq(&self, other: &Self) -> bool {
        let ids = |s: &Self| s.keys.as_ref().map(|k| k.key_ids_text());
        self.mask_keys_file == other.mask_keys_file
            && self.from_env == other.from_env
            && ids(self) == ids(other)
    }
}

impl MaskSection {
    /// Resolves the section, reading the keyring from `mask_keys_file` or `IDGEN_MASK_KEYS`
    /// (not both).
    pub fn resolve(given: MaskArgs) -> Result<MaskSection, ConfigError> {
        let from_env = std::env::var_os(MASK_KEYS_ENV).is_some();
        match (given.mask_keys_file, from_env) {
            (Some(_), true) => Err(err(format!(
                "mask_keys_file and {MASK_KEYS_ENV} are both set: give the masking keys one way"
            ))),
            (Some(path), false) => {
                let keys =
                    Keyring::from_file(&path).map_err(|e| err(format!("mask_keys_file: {e}")))?;
                Ok(MaskSection {
                    mask_keys_file: Some(path),
                    keys: Some(Arc::new(keys)),
                    from_env: false,
                })
            }
            (None, true) => {
                let keys = Keyring::from_env().map_err(|e| err(format!("{MASK_KEYS_ENV}: {e}")))?;
                Ok(MaskSection {
                    mask_keys_file: None,
                    keys: Some(Arc::new(keys)),
                    from_env: true,
                })
            }
            (None, false) => Ok(MaskSection::default()),
        }
    }

    /// What `--check-config` says about masking: key IDs and their source, never keys.
    pub fn summary(&self) -> String {
        match &self.keys {
            None => format!(
                "masking is off (no mask_keys_file, no {MASK_KEYS_ENV}): ?format=masked answers 400"
            ),
            Some(keys) => {
                let ids: Vec<String> = keys.key_ids().map(|k| k.to_string()).collect();
                let source = if self.from_env {
                    format!("from {MASK_KEYS_ENV} (never written)")
                } else {
                    "from mask_keys_file".to_string()
                };
                format!(
                    "masking is on: key ids {} (current {}), {source}",
                    ids.join(", "),
                    keys.current_key_id()
                )
            }
        }
    }
}
