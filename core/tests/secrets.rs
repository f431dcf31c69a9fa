//! No fragment of a URL's password appears in an error, whether the URL fails to parse or
//! parses and then fails to connect. The vectors are shared with every language's tests
//! (tests/vectors/leaky-urls.json).

use std::time::Duration;

use fencelock::{Fence, Locker, LockerOptions};

struct Vector {
    url: String,
    password: String,
}

fn vectors() -> Vec<Vector> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/vectors/leaky-urls.json"
    ))
    .unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| Vector {
            url: v["url"].as_str().unwrap().to_string(),
            password: v["password"].as_str().unwrap().to_string(),
        })
        .collect()
}

/// The password's runs of two or more ASCII letters or digits.
fn fragments(password: &str) -> Vec<&str> {
    password
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|f| f.len() >= 2)
        .collect()
}

fn assert_hidden(what: &str, message: &str, vector: &Vector) {
    for fragment in fragments(&vector.password) {
        assert!(
            !message.contains(fragment),
            "{what} for {:?} shows {fragment:?}: {message}",
            vector.url
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_fragment_of_a_password_appears_in_a_connect_or_open_error() {
    let vectors = vectors();
    assert!(vectors.len() >= 12);
    let options = LockerOptions::default().with_operation_timeout(Duration::from_secs(3));
    let attempts: Vec<_> = vectors
        .iter()
        .map(|vector| {
            let (url, options) = (vector.url.clone(), options.clone());
            tokio::spawn(async move {
                let locker = Locker::connect_with(&url, options.clone()).await.err();
                let fence = Fence::open_with(&url, "resource", options).await.err();
                (locker, fence)
            })
        })
        .collect();
    let mut results = Vec::new();
    for (vector, attempt) in vectors.iter().zip(attempts) {
        let (locker, fence) = attempt.await.unwrap();
        results.push((vector, locker, fence));
    }
    for (vector, locker, fence) in results {
        let locker = locker.unwrap_or_else(|| panic!("{} connected", vector.url));
        assert_hidden("connect", &locker.to_string(), vector);
        assert_hidden("connect (Debug)", &format!("{locker:?}"), vector);
        if let Some(fence) = fence {
            assert_hidden("Fence::open", &fence.to_string(), vector);
        }
    }
}
