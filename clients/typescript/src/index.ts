export * from "./client.js";
export * from "./errors.js";
export { RetryPolicy, type RetryOptions, type CallKind } from "./retry.js";
export type { components, operations, paths } from "./schema.js";
