// Runs the real Pi 1.6.0 agent loop in this process through its SDK, with the scripted
// faux provider (no network), loading the package's extension and the test extension.
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import {
  createAgentSession,
  DefaultResourceLoader,
  ModelRuntime,
  SessionManager,
  SettingsManager,
} from "@earendil-works/pi-coding-agent";
import { fauxAssistantMessage, fauxProvider, fauxToolCall } from "@earendil-works/pi-ai";

export { fauxAssistantMessage, fauxToolCall };

const here = path.dirname(fileURLToPath(import.meta.url));
export const PKG = path.resolve(here, "..");
export const EXTENSION = path.join(PKG, "src", "extension.ts");
export const TEST_EXTENSION = path.join(here, "state-ext.ts");

export interface Probe {
  reads: Array<{ where: string; leaf: string | null; branch: unknown; session: unknown; foldBranch: unknown; foldSession: unknown; key: string | undefined }>;
  errors: string[];
}
export const probe: Probe = ((globalThis as any).__stateProbe ??= { reads: [], errors: [] });

export interface Pi {
  session: any;
  sm: any;
  faux: ReturnType<typeof fauxProvider>;
  notes: string[];
  confirms: string[];
  /** The ctx of the last command (for API calls from the test itself). */
  command(text: string): Promise<void>;
  dispose(): Promise<void>;
}

export interface StartOptions {
  dir: string;
  /** Open this session file (else a new session in `dir/sessions`). */
  open?: string;
  hasUI?: boolean;
  confirm?: boolean;
  extensions?: string[];
}

export function agentDir(dir: string): string {
  return path.join(dir, "agent");
}

export function databasePath(dir: string): string {
  return path.join(agentDir(dir), "sessions", "states.sqlite");
}

export async function startPi(o: StartOptions): Promise<Pi> {
  const cwd = path.join(o.dir, "project");
  const agent = agentDir(o.dir);
  fs.mkdirSync(cwd, { recursive: true });
  fs.mkdirSync(agent, { recursive: true });
  process.env.PI_CODING_AGENT_DIR = agent;
  const sessionDir = path.join(o.dir, "sessions");
  const faux = fauxProvider();
  const runtime = await ModelRuntime.create({
    authPath: path.join(agent, "auth.json"),
    modelsPath: null,
    allowModelNetwork: false,
    refreshOnCreate: false,
  });
  runtime.registerNativeProvider(faux.provider);
  const settingsManager = SettingsManager.inMemory();
  const resourceLoader = new DefaultResourceLoader({
    cwd,
    agentDir: agent,
    settingsManager,
    // The package directory, as `pi -e ./pi` or `pi install ./pi` gives it: Pi loads what
    // package.json lists under pi.extensions (src/extension.ts).
    additionalExtensionPaths: o.extensions ?? [PKG, TEST_EXTENSION],
    noSkills: true,
    noPromptTemplates: true,
    noThemes: true,
    noContextFiles: true,
  });
  await resourceLoader.reload();
  const loadErrors = resourceLoader.getExtensions().errors;
  if (loadErrors.length > 0) throw new Error(`extensions failed to load: ${JSON.stringify(loadErrors)}`);
  const sessionManager = o.open ? SessionManager.open(o.open, sessionDir) : SessionManager.create(cwd, sessionDir);
  const { session } = await createAgentSession({
    cwd,
    agentDir: agent,
    modelRuntime: runtime,
    model: faux.getModel(),
    resourceLoader,
    sessionManager,
    settingsManager,
    noTools: "builtin",
  });
  const notes: string[] = [];
  const confirms: string[] = [];
  const uiContext = o.hasUI
    ? {
        notify: (m: string) => notes.push(m),
        confirm: async (_t: string, m: string) => {
          confirms.push(m);
          return o.confirm ?? false;
        },
      }
    : undefined;
  await session.bindExtensions({
    ...(uiContext ? { uiContext: uiContext as any, mode: "rpc" as const } : { mode: "print" as const }),
    commandContextActions: {
      waitForIdle: () => session.waitForIdle(),
      newSession: async () => ({ cancelled: true }),
      fork: async () => ({ cancelled: true }),
      navigateTree: async (targetId: string, opts?: any) => {
        const r = await session.navigateTree(targetId, { summarize: opts?.summarize ?? false });
        return { cancelled: r.cancelled };
      },
      switchSession: async () => ({ cancelled: true }),
      reload: async () => {},
    },
    onError: (err: any) => {
      notes.push(`extension error: ${err.error}`);
    },
  });
  return {
    session,
    sm: session.sessionManager,
    faux,
    notes,
    confirms,
    command: (text: string) => session.prompt(text),
    dispose: async () => {
      // What Pi's runtime does at quit: session_shutdown, then dispose.
      await session.extensionRunner?.emit({ type: "session_shutdown", reason: "quit" });
      session.dispose();
    },
  };
}

export { fold, customs } from "./fold.ts";
