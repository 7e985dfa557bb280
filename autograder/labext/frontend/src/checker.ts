/**
 * "Check my work": save the notebook, ask the server to grade it, tell whoever listens.
 *
 * One Checker serves the toolbar buttons and the Course panel, so both show the same
 * progress and the same result, and a second click while a check runs does nothing.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { DocumentWidget } from '@jupyterlab/docregistry';
import { ISignal, Signal } from '@lumino/signaling';

import { checkNotebook, ICheckResult, RequestError } from './api';

export interface ICheckEvent {
  path: string;
  state: 'checking' | 'done' | 'failed';
  result?: ICheckResult;
  error?: string;
  /** When a failed check can be tried again (ms since the epoch), when known. */
  retryAt?: number;
}

export class Checker {
  constructor(private readonly app: JupyterFrontEnd) {}

  /** Every start and end of a check. */
  get changed(): ISignal<this, ICheckEvent> {
    return this._changed;
  }

  /** The path being checked, or null. */
  get running(): string | null {
    return this._running;
  }

  /** Save the notebook at ``path`` if it is open, then check it. */
  async check(path: string): Promise<ICheckResult | null> {
    if (this._running) {
      Notification.info(`Still checking ${this._running}: the result comes first.`, {
        autoClose: 4000
      });
      return null;
    }
    this._running = path;
    this._changed.emit({ path, state: 'checking' });
    let result: ICheckResult;
    try {
      await this.saveIfOpen(path);
      result = await checkNotebook(path);
    } catch (error) {
      // Done before anyone hears of it: whoever listens draws an idle panel and button.
      this._running = null;
      const message = error instanceof RequestError ? error.message : String(error);
      const retry = error instanceof RequestError ? error.retryAfter : null;
      const retryAt = retry === null ? undefined : Date.now() + retry * 1000;
      this._changed.emit({ path, state: 'failed', error: message, retryAt });
      Notification.error(`Check my work: ${withRetry(message, retryAt)}`, {
        autoClose: 10000
      });
      return null;
    }
    this._running = null;
    this._changed.emit({ path, state: 'done', result });
    this.announce(result);
    return result;
  }

  private async saveIfOpen(path: string): Promise<void> {
    for (const widget of this.app.shell.widgets('main')) {
      if (widget instanceof DocumentWidget && widget.context.path === path) {
        await widget.context.ready;
        if (widget.context.model.dirty || !widget.context.contentsModel) {
          await widget.context.save();
        }
      }
    }
  }

  private announce(result: ICheckResult): void {
    const auto = result.exercises.filter(e => e.kind === 'auto');
    const passing = auto.filter(e => e.status === 'passing').length;
    const summary =
      `${result.assignment}: ${format(result.score)} / ${format(result.max_score)} points, ` +
      `${passing} of ${auto.length} exercises passing`;
    if (passing === auto.length) {
      Notification.success(summary, { autoClose: 6000 });
    } else {
      Notification.warning(`${summary}. The Course panel says what failed.`, {
        autoClose: 8000
      });
    }
  }

  private _running: string | null = null;
  private _changed = new Signal<this, ICheckEvent>(this);
}

export function format(points: number | null | undefined): string {
  if (points === null || points === undefined) {
    return '–';
  }
  return Number.isInteger(points) ? String(points) : points.toFixed(2).replace(/0$/, '');
}

/** ". You can check again at 10:42:07." for a refusal that says when (". ... now." once
 *  that time has passed); "" when it does not say. Appended to a message. */
export function retryText(retryAt: number | undefined, now = Date.now()): string {
  if (retryAt === undefined) {
    return '';
  }
  if (retryAt <= now) {
    return '. You can check again now.';
  }
  return `. You can check again at ${new Date(retryAt).toLocaleTimeString()}.`;
}

/** ``message`` and what ``retryText`` adds, as one sentence. */
export function withRetry(message: string, retryAt: number | undefined): string {
  const text = retryText(retryAt);
  return text ? message.replace(/[.\s]+$/, '') + text : message;
}
