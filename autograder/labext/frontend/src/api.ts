/**
 * The server side of the extension (autograder/labext/handlers.py), typed.
 *
 * Requests go through JupyterLab's ServerConnection, which adds the server's token and
 * XSRF header: the endpoints refuse anything without them.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

export type Status = 'unchecked' | 'failing' | 'passing' | 'waiting';

export interface ICheck {
  name: string;
  passed: boolean;
  message: string | null;
  hint: string | null;
  pitfall: string | null;
}

export interface IExercise {
  name: string;
  title?: string;
  notebook?: string;
  kind: 'auto' | 'manual';
  score: number | null;
  max_score: number;
  status: Status;
  /** Classic mistakes the checks recognised, worded for the student (shown first). */
  diagnoses?: string[];
  checks: ICheck[];
  /** One reason behind every failing check (a stub not written yet), said once. */
  shared_reason?: string | null;
  /** Passing checks of names, shapes or properties that earn points only next to a
   *  passing check of the values. */
  waiting_on_values?: number;
}

export interface IAssignment {
  name: string;
  title: string;
  release: string | null;
  due: string | null;
  visibility: 'full' | 'names' | 'score' | 'off';
  /** When course.toml's calendar changes what a check shows next, and to what. */
  visibility_next?: { at: string; visibility: 'full' | 'names' | 'score' | 'off' } | null;
  released: boolean;
  notebooks: { id: string; path: string | null }[];
  exercises: IExercise[];
  checked_at: string | null;
  score: number | null;
  max_score: number;
}

export interface ICourse {
  title: string;
  problem: string | null;
  readme?: string | null;
  lectures: { title: string; path: string | null; assignment: string | null }[];
  assignments: IAssignment[];
}

export interface ICheckResult {
  assignment: string;
  notebook: string;
  path: string;
  score: number;
  max_score: number;
  waiting_score: number;
  visibility: string;
  exercises: IExercise[];
  notes: string[];
  cached: boolean;
  checked_at: string;
  seconds: number | null;
}

export interface IOpened {
  assignment: string;
  /** The notebook to open and check: the fetched copy where there is one. */
  path: string;
  paths: Record<string, string>;
  fetched: boolean;
  note: string | null;
}

export interface IHandin {
  assignment: string;
  paths: Record<string, string>;
  warnings: string[];
}

/** A refusal from the server: its message says what to do; ``retryAfter`` (seconds),
 *  when known, how soon asking again can succeed. */
export class RequestError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly retryAfter: number | null = null
  ) {
    super(message);
  }
}

/** Seconds to wait when the server itself did not answer. */
export const NO_ANSWER_RETRY_SECONDS = 30;

async function request<T>(endpoint: string, init: RequestInit = {}): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'autograder', 'api', endpoint);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new RequestError(
      `the Jupyter server did not answer (${error})`,
      0,
      NO_ANSWER_RETRY_SECONDS
    );
  }
  const text = await response.text();
  let body: any = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = { message: text };
  }
  if (!response.ok) {
    const message = body?.message || `${response.status} ${response.statusText}`;
    let retry = typeof body?.retry_after === 'number' ? body.retry_after : null;
    if (retry === null && response.status >= 502) {
      retry = NO_ANSWER_RETRY_SECONDS; // a proxy or the server gave up: soon, not now
    }
    throw new RequestError(message, response.status, retry);
  }
  return body as T;
}

export function fetchCourse(): Promise<ICourse> {
  return request<ICourse>('course');
}

export function checkNotebook(path: string): Promise<ICheckResult> {
  return request<ICheckResult>('check', {
    method: 'POST',
    body: JSON.stringify({ path })
  });
}

/** The student's copy of ``assignment``: nbgrader's fetched one, fetched if missing. */
export function openAssignment(assignment: string): Promise<IOpened> {
  return request<IOpened>('open', {
    method: 'POST',
    body: JSON.stringify({ assignment })
  });
}

/** What to say before nbgrader's Submit sends ``<assignment>/``. */
export function handinStatus(assignment: string): Promise<IHandin> {
  return request<IHandin>(`handin?assignment=${encodeURIComponent(assignment)}`);
}
