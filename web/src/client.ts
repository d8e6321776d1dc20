// The one way the page talks to the server: rollout.v1.RolloutService over Connect, with the
// bearer token the user gave (kept for this tab only, in sessionStorage).
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { BadRequestSchema, type BadRequest_FieldViolation } from "./gen/google/rpc/error_details_pb";
import { RolloutService } from "./gen/rollout/v1/rollout_pb";

const TOKEN_KEY = "rollout-dashboard-token";

export function token(): string {
  return sessionStorage.getItem(TOKEN_KEY) ?? "";
}

export function setToken(value: string): void {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

const bearer: Interceptor = (next) => async (request) => {
  const value = token();
  if (value) request.header.set("Authorization", `Bearer ${value}`);
  return next(request);
};

export const api = createClient(
  RolloutService,
  createConnectTransport({
    baseUrl: location.origin,
    useBinaryFormat: true,
    interceptors: [bearer],
  }),
);

export function isUnauthenticated(error: unknown): boolean {
  return ConnectError.from(error).code === Code.Unauthenticated;
}

export function describeError(error: unknown): string {
  const connectError = ConnectError.from(error);
  return `${Code[connectError.code]}: ${connectError.rawMessage}`;
}

/** The fields a refused request named (google.rpc.BadRequest details, as the gRPC API sends
 * them), each with what is wrong with it; none for other errors. */
export function fieldViolations(error: unknown): BadRequest_FieldViolation[] {
  return ConnectError.from(error)
    .findDetails(BadRequestSchema)
    .flatMap((details) => details.fieldViolations);
}
