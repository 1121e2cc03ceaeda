;; cpu_ge in hand-written WebAssembly text: matches when the worker offers at least `min` CPUs;
;; `setup` hands the tasks `cpus` (the worker's CPU count).
;;
;; This is the core module; `build.sh` embeds the `environment` world of wit/weir.wit and wraps
;; it into a component. The functions follow the component model's canonical ABI:
;;   evaluate(config: list<tuple<string, string>>) -> result<bool, string>
;;     core: (param list-pointer count) (result pointer-to-result)
;;     each list element is 16 bytes: key pointer, key length, value pointer, value length;
;;     the result is a discriminant byte (0 = ok, 1 = err) and, at offset 4, the bool byte or
;;     the error string's pointer and length.
;;   setup(config) -> result<list<tuple<string, string>>, string>  (same shapes)
;; The host copies arguments in through `cabi_realloc` (a bump allocator here) and calls the
;; `cabi_post_*` functions once it has read a result: they free everything by resetting the bump.
(module
  (import "weir:plugin/host@0.1.0" "cpu-count" (func $cpu_count (result i32)))

  (memory (export "memory") 1)

  ;; Static memory, below the heap at 1024:
  ;;   32   "cpus"                 the setup key
  ;;   64   error messages         (lengths in $error)
  ;;   512  evaluate's result      (12 bytes)
  ;;   528  setup's result         (12 bytes)
  ;;   544  setup's one list entry (16 bytes)
  ;;   576  setup's value digits   (up to 10 bytes, written backwards from 586)
  (data (i32.const 32) "cpus")
  (data (i32.const 64) "cpu_ge: missing config `min` (a whole number of CPUs, e.g. min=4)")
  (data (i32.const 192) "cpu_ge: config `min` must be a whole number of CPUs")
  (data (i32.const 320) "cpu_ge: unknown config key; cpu_ge takes only `min`")

  (global $heap (mut i32) (i32.const 1024))

  (func (export "cabi_realloc")
    (param $old i32) (param $old_size i32) (param $align i32) (param $size i32) (result i32)
    (local $ptr i32) (local $end i32) (local $have i32)
    (local.set $ptr
      (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get $align))))
    (local.set $end (i32.add (local.get $ptr) (local.get $size)))
    (if (i32.lt_u (local.get $end) (local.get $ptr)) (then unreachable))
    (local.set $have (i32.mul (memory.size) (i32.const 65536)))
    (if (i32.gt_u (local.get $end) (local.get $have))
      (then
        (if (i32.eq
              (memory.grow
                (i32.div_u
                  (i32.add (i32.sub (local.get $end) (local.get $have)) (i32.const 65535))
                  (i32.const 65536)))
              (i32.const -1))
          (then unreachable))))
    (if (local.get $old)
      (then
        (memory.copy (local.get $ptr) (local.get $old)
          (select (local.get $old_size) (local.get $size)
            (i32.lt_u (local.get $old_size) (local.get $size))))))
    (global.set $heap (local.get $end))
    (local.get $ptr))

  ;; Is the string at ptr/len "min"?
  (func $is_min (param $ptr i32) (param $len i32) (result i32)
    (if (i32.ne (local.get $len) (i32.const 3)) (then (return (i32.const 0))))
    (i32.and
      (i32.and
        (i32.eq (i32.load8_u (local.get $ptr)) (i32.const 109))            ;; m
        (i32.eq (i32.load8_u offset=1 (local.get $ptr)) (i32.const 105)))  ;; i
      (i32.eq (i32.load8_u offset=2 (local.get $ptr)) (i32.const 110))))   ;; n

  ;; Decimal digits only, at most 4294967295; -2 for anything else.
  (func $parse (param $ptr i32) (param $len i32) (result i64)
    (local $i i32) (local $digit i32) (local $value i64)
    (if (i32.eqz (local.get $len)) (then (return (i64.const -2))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $len)))
        (local.set $digit
          (i32.sub (i32.load8_u (i32.add (local.get $ptr) (local.get $i))) (i32.const 48)))
        (if (i32.gt_u (local.get $digit) (i32.const 9)) (then (return (i64.const -2))))
        (local.set $value
          (i64.add (i64.mul (local.get $value) (i64.const 10))
                   (i64.extend_i32_u (local.get $digit))))
        (if (i64.gt_u (local.get $value) (i64.const 4294967295)) (then (return (i64.const -2))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (local.get $value))

  ;; The config's `min`, or -1 missing, -2 not a whole number, -3 an unknown key.
  (func $minimum (param $list i32) (param $count i32) (result i64)
    (local $i i32) (local $entry i32) (local $found i64)
    (local.set $found (i64.const -1))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $count)))
        (local.set $entry (i32.add (local.get $list) (i32.mul (local.get $i) (i32.const 16))))
        (if (i32.eqz (call $is_min (i32.load (local.get $entry))
                                   (i32.load offset=4 (local.get $entry))))
          (then (return (i64.const -3))))
        (local.set $found (call $parse (i32.load offset=8 (local.get $entry))
                                       (i32.load offset=12 (local.get $entry))))
        (if (i64.eq (local.get $found) (i64.const -2)) (then (return (i64.const -2))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (local.get $found))

  ;; Store the message for error code $code as a string (pointer, length) at $dest.
  (func $error (param $dest i32) (param $code i64)
    (if (i64.eq (local.get $code) (i64.const -1))
      (then (i32.store (local.get $dest) (i32.const 64))
            (i32.store offset=4 (local.get $dest) (i32.const 65))
            (return)))
    (if (i64.eq (local.get $code) (i64.const -2))
      (then (i32.store (local.get $dest) (i32.const 192))
            (i32.store offset=4 (local.get $dest) (i32.const 51))
            (return)))
    (i32.store (local.get $dest) (i32.const 320))
    (i32.store offset=4 (local.get $dest) (i32.const 51)))

  (func (export "weir:plugin/condition@0.1.0#evaluate")
    (param $list i32) (param $count i32) (result i32)
    (local $min i64)
    (local.set $min (call $minimum (local.get $list) (local.get $count)))
    (if (i64.lt_s (local.get $min) (i64.const 0))
      (then
        (i32.store8 (i32.const 512) (i32.const 1))
        (call $error (i32.const 516) (local.get $min))
        (return (i32.const 512))))
    (i32.store8 (i32.const 512) (i32.const 0))
    (i32.store8 (i32.const 516)
      (i64.ge_u (i64.extend_i32_u (call $cpu_count)) (local.get $min)))
    (i32.const 512))

  (func (export "weir:plugin/condition@0.1.0#setup")
    (param $list i32) (param $count i32) (result i32)
    (local $n i32) (local $at i32)
    (local.set $n (call $cpu_count))
    (local.set $at (i32.const 586))
    (loop $digit
      (local.set $at (i32.sub (local.get $at) (i32.const 1)))
      (i32.store8 (local.get $at) (i32.add (i32.const 48) (i32.rem_u (local.get $n) (i32.const 10))))
      (local.set $n (i32.div_u (local.get $n) (i32.const 10)))
      (br_if $digit (i32.ne (local.get $n) (i32.const 0))))
    (i32.store (i32.const 544) (i32.const 32))
    (i32.store (i32.const 548) (i32.const 4))
    (i32.store (i32.const 552) (local.get $at))
    (i32.store (i32.const 556) (i32.sub (i32.const 586) (local.get $at)))
    (i32.store8 (i32.const 528) (i32.const 0))
    (i32.store (i32.const 532) (i32.const 544))
    (i32.store (i32.const 536) (i32.const 1))
    (i32.const 528))

  (func (export "weir:plugin/condition@0.1.0#teardown"))

  (func (export "cabi_post_weir:plugin/condition@0.1.0#evaluate") (param i32)
    (global.set $heap (i32.const 1024)))
  (func (export "cabi_post_weir:plugin/condition@0.1.0#setup") (param i32)
    (global.set $heap (i32.const 1024)))
)
