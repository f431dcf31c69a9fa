//! No fragment of a URL's password appears in an error, whether the URL fails to parse or
//! parses and then fails to connect. The vectors are shared with every language's tests
//! (tests/vectors/leaky-urls.json).

use std::time::Duration;

use fencelock::{Fence, Locker, LockerOptions};

#[path = "../../../tests/vectors/leaky_urls.rs"]
mod leaky_urls;

use leaky_urls::{assert_hidden, vectors};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_fragment_of_a_password_appears_in_a_connect_or_open_error() {
    let vectors = vectors();
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
