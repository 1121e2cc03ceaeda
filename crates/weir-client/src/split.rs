//! A submission too large for one request, as consecutive submissions that each fit.

use weir_net::NetError;
use weir_proto::{FrameError, MAX_FRAME, MAX_TASKS_PER_SUBMIT, NewGroup, Request, RequestId};

/// `group` (one task per input) as the groups of consecutive submissions that each fit in one
/// request ([`MAX_FRAME`]) and in one submission's task limit: just itself when it fits. An input
/// too large to go in any request is [`NetError::RequestTooLarge`] naming it; nothing is split
/// then. A group of `count` tasks without inputs is itself.
pub fn split_submission(group: NewGroup) -> Result<Vec<NewGroup>, NetError> {
    split(group, MAX_FRAME, MAX_TASKS_PER_SUBMIT as usize)
}

/// Bytes of a LEB128 varint (postcard's lengths and integers).
fn varint(n: usize) -> usize {
    (usize::BITS - n.leading_zeros()).div_ceil(7).max(1) as usize
}

fn split(group: NewGroup, limit: usize, most: usize) -> Result<Vec<NewGroup>, NetError> {
    if group.inputs.is_empty() {
        return Ok(vec![group]);
    }
    let NewGroup { spec, inputs, .. } = group;
    let part = |inputs: Vec<Vec<u8>>| NewGroup {
        spec: spec.clone(),
        count: inputs.len() as u32,
        inputs,
    };
    // The request without inputs, then each input's bytes and length; the count and the number
    // of inputs (1 byte each when 0) grow with the inputs.
    // The request id at its longest (a varint).
    let empty = Request::Submit {
        components: Vec::new(),
        groups: vec![part(Vec::new())],
        request: Some(RequestId::MAX),
    };
    let base = postcard::experimental::serialized_size(&empty).map_err(FrameError::Encode)?;
    let size = |bytes: usize, n: usize| base + bytes + 2 * (varint(n) - 1);
    // Not even an empty input fits: the spec alone is too large (a function and what it holds).
    if size(1, 1) > limit {
        return Err(NetError::RequestTooLarge {
            size: size(1, 1),
            limit,
            input: None,
        });
    }
    let mut parts = Vec::new();
    let (mut current, mut bytes) = (Vec::new(), 0);
    for (index, input) in inputs.into_iter().enumerate() {
        let cost = input.len() + varint(input.len());
        if size(cost, 1) > limit {
            return Err(NetError::RequestTooLarge {
                size: size(cost, 1),
                limit,
                input: Some(index),
            });
        }
        if !current.is_empty()
            && (size(bytes + cost, current.len() + 1) > limit || current.len() == most)
        {
            parts.push(part(std::mem::take(&mut current)));
            bytes = 0;
        }
        current.push(input);
        bytes += cost;
    }
    parts.push(part(current));
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_proto::{TaskKind, TaskSpec};

    fn group(inputs: &[usize]) -> NewGroup {
        NewGroup {
            spec: TaskSpec {
                kind: TaskKind::Command {
                    argv: vec!["cat".into()],
                    env: Vec::new(),
                },
                capabilities: Vec::new(),
                environments: Vec::new(),
                priority: 0,
                timeout_ms: 0,
                retries: 1,
                input: Vec::new(),
            },
            count: inputs.len() as u32,
            inputs: inputs.iter().map(|&n| vec![7; n]).collect(),
        }
    }

    fn frame(part: &NewGroup) -> usize {
        let request = Request::Submit {
            components: Vec::new(),
            groups: vec![part.clone()],
            request: Some(RequestId::MAX),
        };
        weir_proto::encode(&request).unwrap().len() - 4
    }

    #[test]
    fn a_submission_is_split_below_the_frame_limit_in_order_and_exactly() {
        let whole = group(&[100, 300, 50, 200, 1, 0, 250]);
        let limit = frame(&group(&[100, 300])) + 10;
        let parts = split(whole.clone(), limit, 1000).unwrap();
        assert!(parts.len() > 2, "{}", parts.len());
        for part in &parts {
            assert!(frame(part) <= limit);
            assert_eq!(part.count as usize, part.inputs.len());
        }
        let inputs: Vec<_> = parts.iter().flat_map(|p| p.inputs.clone()).collect();
        assert_eq!(inputs, whole.inputs);
        // Exactly: a group that fits to the byte is not split.
        let fits = group(&[3000; 200]);
        assert_eq!(
            split(fits.clone(), frame(&fits), 1000).unwrap(),
            vec![fits.clone()]
        );
        assert_eq!(
            split(fits.clone(), frame(&fits) - 1, 1000).unwrap().len(),
            2
        );
        // And by the task limit.
        let counts: Vec<_> = split(group(&[1; 10]), usize::MAX, 4)
            .unwrap()
            .iter()
            .map(|p| p.count)
            .collect();
        assert_eq!(counts, [4, 4, 2]);
    }

    #[test]
    fn an_input_too_large_for_any_request_is_named() {
        let limit = frame(&group(&[1000]));
        match split(group(&[10, 1001, 10]), limit, 1000) {
            Err(NetError::RequestTooLarge { size, input, .. }) => {
                assert_eq!((size, input), (limit + 1, Some(1)));
            }
            other => panic!("{other:?}"),
        }
        // The spec alone (a large function, say) names no input.
        let small = frame(&group(&[0])) - 1;
        assert!(matches!(
            split(group(&[0, 0]), small, 1000),
            Err(NetError::RequestTooLarge { input: None, .. })
        ));
    }
}
