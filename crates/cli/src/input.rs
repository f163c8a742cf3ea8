//! Reading users' files. Every failure is an [`InputError`]: one line naming the file, the
//! object and the field; the binary exits 2 on it.

use capstan_model::catalog::{Catalog, CatalogFile};
use std::fmt;

/// Bad input from the user (exit code 2), as opposed to an internal failure (exit code 1).
#[derive(Debug)]
pub struct InputError(pub String);

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InputError {}

/// Reads a file, or standard input for `-`.
pub fn read(path: &str) -> Result<String, InputError> {
    if path == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| InputError(format!("-: {e}")))?;
        return Ok(s);
    }
    std::fs::read_to_string(path).map_err(|e| InputError(format!("{path}: {e}")))
}

/// Loads a catalog file (JSON or YAML), or the built-in one when `path` is `None`.
pub fn catalog(path: Option<&str>) -> Result<Catalog, InputError> {
    let Some(path) = path else {
        return Ok(Catalog::builtin());
    };
    catalog_from_text(path, &read(path)?)
}

/// A catalog from the text of `path` (JSON or YAML, told by content).
pub fn catalog_from_text(path: &str, text: &str) -> Result<Catalog, InputError> {
    let value: serde_json::Value = if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| InputError(format!("{path}: invalid JSON: {e}")))?
    } else {
        serde_yaml::from_str(text).map_err(|e| InputError(format!("{path}: invalid YAML: {e}")))?
    };
    let file: CatalogFile = serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        InputError(format!("{path}: catalog: {field}: {}", e.into_inner()))
    })?;
    Catalog::from_file(file).map_err(|e| InputError(format!("{path}: catalog: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_catalog_error_names_file_and_field() {
        let dir = std::env::temp_dir().join(format!("capstan-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("cat.json");
        std::fs::write(&p, r#"{"instance_types":[{"name":"x","arch":"amd64","vcpu":"two","memory_mib":1,"max_pods":1}]}"#).unwrap();
        let err = catalog(Some(p.to_str().unwrap())).unwrap_err().to_string();
        assert!(err.ends_with("cat.json: catalog: instance_types[0].vcpu: invalid type: string \"two\", expected i64"), "{err}");
    }
}
