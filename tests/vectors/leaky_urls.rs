//! The Rust side of `leaky-urls.json`: the vectors and the password fragments no message may
//! show. Included by the core's and the command's tests (`#[path]`), which both sit one folder
//! below the repository's root.

pub struct Vector {
    pub url: String,
    pub password: String,
}

pub fn vectors() -> Vec<Vector> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/vectors/leaky-urls.json"
    ))
    .unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let vectors: Vec<Vector> = json["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| Vector {
            url: v["url"].as_str().unwrap().to_string(),
            password: v["password"].as_str().unwrap().to_string(),
        })
        .collect();
    assert!(vectors.len() >= 12, "{} vectors", vectors.len());
    vectors
}

/// Fails when `shown` contains a run of two or more ASCII letters or digits of the password.
pub fn assert_hidden(what: &str, shown: &str, vector: &Vector) {
    for fragment in vector
        .password
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|f| f.len() >= 2)
    {
        assert!(
            !shown.contains(fragment),
            "{what} for {:?} shows {fragment:?}: {shown}",
            vector.url
        );
    }
}
