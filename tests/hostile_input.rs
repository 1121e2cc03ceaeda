//! Bad input from peers and operators, generated at random: the frame decoder and the policy
//! content parser must answer every input with a value or an error, never a panic or a hang.

use proptest::prelude::*;
use weir::proto::{self, FrameError, FromWorker, Request, ToWorker};
use weir_waterfall::{Flavor, Policy};

fn decode_all(bytes: &[u8]) {
    let _ = proto::decode::<Request>(bytes);
    let _ = proto::decode::<FromWorker>(bytes);
    let _ = proto::decode::<ToWorker>(bytes);
    let _ = proto::decode::<proto::Hello>(bytes);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn the_decoder_never_panics_on_random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        decode_all(&bytes);
    }

    #[test]
    fn the_decoder_never_panics_on_mutated_valid_frames(flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8), cut in any::<usize>()) {
        let valid = proto::encode(&Request::Submit {
            components: vec![vec![0, 97, 115, 109]],
            groups: vec![proto::NewGroup {
                spec: proto::TaskSpec {
                    kind: proto::TaskKind::Command { argv: vec!["echo".into(), "hi".into()], env: vec![("A".into(), "b".into())] },
                    capabilities: vec![("gpu".into(), 1)],
                    environments: vec!["big".into()],
                    priority: -3,
                    timeout_ms: 1000,
                    retries: 2,
                    input: b"input".to_vec(),
                },
                count: 7,
                inputs: vec![b"x".to_vec()],
            }],
            request: Some(u128::MAX - 5),
        }).unwrap();
        let mut bytes = valid[4..].to_vec();
        for (at, value) in flips {
            let len = bytes.len();
            bytes[at % len] = value;
        }
        let cut = cut % (bytes.len() + 1);
        decode_all(&bytes[..cut]);
    }

    #[test]
    fn the_frame_reader_refuses_oversized_lengths_before_allocating(size in (proto::MAX_FRAME as u32 + 1)..=u32::MAX) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let bytes = size.to_be_bytes();
        let result = runtime.block_on(proto::frame::read::<_, Request>(&mut bytes.as_slice()));
        let too_large = matches!(result, Err(FrameError::TooLarge { .. }));
        prop_assert!(too_large, "size {} was not refused", size);
    }

    #[test]
    fn the_policy_parser_answers_every_content(content in "[0-9a-z ,#\\-\\n\\t]{0,200}") {
        for flavor in [Flavor::ManagerId, Flavor::WorkerType] {
            match Policy::parse(flavor, &content) {
                Ok(policy) => prop_assert!(!policy.rules.is_empty()),
                Err(error) => prop_assert!(!error.to_string().is_empty()),
            }
        }
    }
}
