// Placeholder: the Redis harness replaces this with process bookkeeping.
export default function setup() {
  return () => {}
}
