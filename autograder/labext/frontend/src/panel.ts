/**
 * The Course panel (left side bar): lectures and assignments from course/course.toml,
 * each assignment's exercises with their points and status, and what the last check
 * said about them. Plain DOM, styled only with JupyterLab's theme variables.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Widget } from '@lumino/widgets';

import { Notification } from '@jupyterlab/apputils';

import {
  fetchCourse,
  IAssignment,
  ICheck,
  ICheckResult,
  ICourse,
  IExercise,
  openAssignment,
  RequestError
} from './api';
import { Checker, format, ICheckEvent, withRetry } from './checker';
import { checkIcon, courseIcon } from './icons';
import { revealExercise } from './reveal';

const MAX_CHECKS = 3;

const STATUS_TEXT: Record<string, string> = {
  unchecked: 'not checked',
  failing: 'failing',
  passing: 'passing',
  waiting: 'waiting for a person'
};

export class CoursePanel extends Widget {
  constructor(
    private readonly app: JupyterFrontEnd,
    private readonly checker: Checker
  ) {
    super();
    this.id = 'transformers-course-panel';
    this.addClass('tc-CoursePanel');
    this.title.icon = courseIcon;
    this.title.caption = 'Course';
    checker.changed.connect(this.onCheck, this);
    void this.refresh();
  }

  /** Ask the server again (after a check, or the refresh button). */
  async refresh(): Promise<void> {
    try {
      this.course = await fetchCourse();
      this.error = null;
    } catch (error) {
      this.error = String((error as Error).message || error);
    }
    this.render();
  }

  private onCheck(_: Checker, event: ICheckEvent): void {
    const name = this.assignmentOf(event.path, event.result);
    if (name) {
      this.expanded.add(name);
    }
    if (event.state === 'done' && event.result) {
      this.results.set(event.result.assignment, event.result);
      this.failures.delete(event.result.assignment);
      void this.refresh();
      return;
    }
    if (event.state === 'failed' && name) {
      this.fail(name, event.error || 'the check failed', event.retryAt);
      return;
    }
    this.render();
  }

  /** Say what went wrong under the assignment, and when to try again; the buttons stay
   *  usable, and the panel draws itself again when that time comes. */
  private fail(name: string, message: string, retryAt?: number): void {
    this.failures.set(name, { message, retryAt });
    if (retryAt !== undefined) {
      window.setTimeout(() => this.render(), Math.max(0, retryAt - Date.now()) + 50);
    }
    this.render();
  }

  /** The student's copy of ``a`` (nbgrader's fetched one, fetched now if missing): the
   *  one notebook that Open, Check my work and the Assignment List's Submit all use. */
  private async copyOf(a: IAssignment): Promise<string | null> {
    try {
      const opened = await openAssignment(a.name);
      if (opened.note) {
        Notification.warning(opened.note, { autoClose: 8000 });
      }
      const known = a.notebooks[0]?.path;
      if (known !== opened.path) {
        void this.refresh(); // the links now point at the fetched copy
      }
      return opened.path;
    } catch (error) {
      const message = error instanceof RequestError ? error.message : String(error);
      const retry = error instanceof RequestError ? error.retryAfter : null;
      this.fail(a.name, message, retry === null ? undefined : Date.now() + retry * 1000);
      return null;
    }
  }

  private async openCopy(a: IAssignment): Promise<void> {
    const path = await this.copyOf(a);
    if (path) {
      await this.app.commands.execute('docmanager:open', { path });
    }
  }

  private async checkCopy(a: IAssignment): Promise<void> {
    this.failures.delete(a.name);
    const path = await this.copyOf(a);
    if (path) {
      await this.checker.check(path);
    }
  }

  private assignmentOf(path: string, result?: ICheckResult): string | null {
    if (result) {
      return result.assignment;
    }
    for (const a of this.course?.assignments ?? []) {
      if (a.notebooks.some(n => n.path === path)) {
        return a.name;
      }
    }
    return null;
  }

  // -- rendering ---------------------------------------------------------------------
  private render(): void {
    const root = this.node;
    root.replaceChildren();
    const header = el('div', 'tc-header');
    header.append(el('h2', 'tc-title', this.course?.title ?? 'Course'));
    const reload = el('button', 'tc-iconButton jp-mod-minimal', '↻');
    reload.title = 'Reload the course';
    reload.onclick = () => void this.refresh();
    header.append(reload);
    root.append(header);

    const problem = this.error ?? this.course?.problem;
    if (problem) {
      root.append(el('div', 'tc-problem', problem));
    }
    if (!this.course) {
      return;
    }
    if (this.course.readme) {
      const readme = el('a', 'tc-link', 'Read me first: how the course works');
      readme.onclick = () =>
        void this.app.commands.execute('docmanager:open', {
          path: this.course!.readme,
          factory: 'Markdown Preview'
        });
      root.append(readme);
    }
    if (this.course.lectures.length) {
      root.append(el('h3', 'tc-section', 'Lectures'));
      const list = el('ul', 'tc-lectures');
      for (const lecture of this.course.lectures) {
        const item = el('li', 'tc-lecture', lecture.title);
        if (lecture.path) {
          item.classList.add('tc-clickable');
          item.onclick = () =>
            void this.app.commands.execute('docmanager:open', { path: lecture.path });
        }
        list.append(item);
      }
      root.append(list);
    }
    root.append(el('h3', 'tc-section', 'Assignments'));
    for (const assignment of this.course.assignments) {
      root.append(this.renderAssignment(assignment));
    }
  }

  private renderAssignment(a: IAssignment): HTMLElement {
    const box = el('section', 'tc-assignment');
    box.dataset.assignment = a.name;
    const open = this.expanded.has(a.name);
    const head = el('div', 'tc-assignmentHead tc-clickable');
    head.append(el('span', 'tc-caret', open ? '▾' : '▸'));
    head.append(el('span', 'tc-assignmentTitle', a.title));
    const points = a.released
      ? `${format(a.score)} / ${format(a.max_score)}`
      : 'not released';
    head.append(el('span', 'tc-points', points));
    head.onclick = () => {
      open ? this.expanded.delete(a.name) : this.expanded.add(a.name);
      this.render();
    };
    box.append(head);

    const dates = [a.release && `released ${day(a.release)}`, a.due && `due ${day(a.due)}`];
    const meta = dates.filter(Boolean).join(' · ');
    if (meta) {
      box.append(el('div', 'tc-meta', meta));
    }
    if (a.visibility_next) {
      const next = a.visibility_next;
      const when = new Date(next.at);
      const at = isNaN(when.getTime()) ? next.at : when.toLocaleString();
      box.append(el('div', 'tc-meta tc-visibilityNext',
        `Check my work shows ${SHOWS[a.visibility]} now; from ${at}, ${SHOWS[next.visibility]}.`));
    }
    const running = this.checker.running;
    const checking = running !== null && a.notebooks.some(n => n.path === running);
    if (checking) {
      const progress = el('div', 'tc-progress');
      progress.append(el('span', 'tc-spinner'), el('span', '', 'Checking your saved work…'));
      box.append(progress);
    }
    const failure = this.failures.get(a.name);
    if (failure) {
      box.append(el('div', 'tc-problem', withRetry(failure.message, failure.retryAt)));
    }
    if (!open) {
      box.append(this.renderSummary(a));
      return box;
    }
    if (a.released) {
      // (no path yet in a student's lab: Open fetches the assignment first)
      const actions = el('div', 'tc-actions');
      const openButton = el('button', 'tc-button', 'Open');
      openButton.title = 'Open your copy (the one the Assignment List submits)';
      openButton.onclick = () => void this.openCopy(a);
      actions.append(openButton);
      if (a.visibility !== 'off') {
        const check = el('button', 'tc-button tc-mod-primary tc-checkButton');
        // (an icon's element() takes over its container's classes: give it its own span)
        const icon = el('span');
        checkIcon.element({ container: icon });
        icon.classList.add('tc-buttonIcon');
        check.append(icon, el('span', '', checking ? 'Checking…' : 'Check my work'));
        check.disabled = this.checker.running !== null;
        check.onclick = () => void this.checkCopy(a);
        actions.append(check);
      }
      box.append(actions);
    }
    if (!a.released) {
      box.append(el('div', 'tc-meta', 'Not released yet.'));
      return box;
    }
    const list = el('ul', 'tc-exercises');
    for (const exercise of a.exercises) {
      list.append(this.renderExercise(a, exercise));
    }
    box.append(list);
    const result = this.results.get(a.name);
    if (result?.notes.length) {
      const notes = el('ul', 'tc-notes');
      for (const note of result.notes) {
        notes.append(el('li', '', note));
      }
      box.append(el('div', 'tc-notesTitle', 'Notes on your notebook'), notes);
    }
    if (a.checked_at) {
      const when = new Date(a.checked_at).toLocaleString();
      const cached = result?.cached ? ' (unchanged since the last check)' : '';
      box.append(el('div', 'tc-meta', `Last checked ${when}${cached}`));
    }
    return box;
  }

  private renderSummary(a: IAssignment): HTMLElement {
    const summary = el('div', 'tc-summary');
    if (!a.released) {
      return summary;
    }
    for (const status of ['passing', 'failing', 'waiting', 'unchecked']) {
      const n = a.exercises.filter(e => e.status === status).length;
      if (n) {
        const chip = el('span', `tc-chip tc-status-${status}`, `${n} ${STATUS_TEXT[status]}`);
        summary.append(chip);
      }
    }
    return summary;
  }

  private renderExercise(a: IAssignment, e: IExercise): HTMLElement {
    const item = el('li', `tc-exercise tc-status-${e.status}`);
    item.dataset.exercise = e.name;
    item.dataset.status = e.status;
    const row = el('div', 'tc-exerciseRow tc-clickable');
    row.title = `${STATUS_TEXT[e.status]}: click to go to the cell`;
    row.append(el('span', 'tc-statusIcon', statusMark(e.status)));
    const label = el('span', 'tc-exerciseTitle', e.title || e.name);
    row.append(label);
    const points =
      e.kind === 'manual'
        ? `${format(e.max_score)} pts`
        : `${e.score === null ? '–' : format(e.score)} / ${format(e.max_score)}`;
    row.append(el('span', 'tc-points', points));
    const notebook = a.notebooks.find(n => n.id === e.notebook) ?? a.notebooks[0];
    row.onclick = async () => {
      const path = a.notebooks.length > 1 ? notebook?.path : await this.copyOf(a);
      if (path) {
        void revealExercise(this.app, path, e.name);
      }
    };
    item.append(row);
    item.append(el('div', 'tc-exerciseStatus', `${e.name} · ${STATUS_TEXT[e.status]}`));
    for (const diagnosis of e.diagnoses ?? []) {
      item.append(withCode(el('div', 'tc-diagnosis'), diagnosis));
    }
    const failed = e.checks.filter(c => !c.passed);
    if (e.shared_reason) {
      // One cause behind every failure (say, the functions are not written yet): say it once.
      item.append(withCode(el('div', 'tc-checkMessage tc-shared'), e.shared_reason));
    } else if (failed.length) {
      const shown = this.showAll.has(e.name) ? failed : failed.slice(0, MAX_CHECKS);
      const checks = el('ul', 'tc-checks');
      for (const check of shown) {
        checks.append(renderCheck(check));
      }
      item.append(checks);
      if (shown.length < failed.length) {
        const more = el('a', 'tc-link tc-more', `${failed.length - shown.length} more failing`);
        more.onclick = () => {
          this.showAll.add(e.name);
          this.render();
        };
        item.append(more);
      }
    }
    if (e.checks.length) {
      const passed = e.checks.length - failed.length;
      const waiting = e.waiting_on_values ?? 0;
      // A check of names or shapes that passes on a stub earns nothing yet: say so.
      const earning =
        waiting === 0
          ? ''
          : waiting === passed
            ? `; ${passed === 1 ? 'it counts' : 'they count'} once a check of your values passes`
            : `; ${waiting} of them count once a check of your values passes`;
      item.append(
        el('div', 'tc-meta', `${passed} of ${e.checks.length} hidden checks pass${earning}`)
      );
    }
    return item;
  }

  private course: ICourse | null = null;
  private error: string | null = null;
  private expanded = new Set<string>();
  private results = new Map<string, ICheckResult>();
  private failures = new Map<string, { message: string; retryAt?: number }>();
  private showAll = new Set<string>();
}

function renderCheck(check: ICheck): HTMLElement {
  const item = el('li', 'tc-check');
  item.append(el('div', 'tc-checkName', `✗ ${check.name}`));
  if (check.message) {
    item.append(withCode(el('div', 'tc-checkMessage'), check.message));
  }
  if (check.hint) {
    item.append(withCode(el('div', 'tc-checkHint'), `Hint: ${check.hint}`));
  }
  if (check.pitfall) {
    // A cause to look for, not a verdict: the student may well not have made it.
    item.append(withCode(el('div', 'tc-checkPitfall'), `A common cause: ${check.pitfall}`));
  }
  return item;
}

function statusMark(status: string): string {
  return { passing: '✓', failing: '✗', waiting: '◐', unchecked: '○' }[status] ?? '○';
}

/** What "Check my work" shows at each visibility setting of course.toml. */
const SHOWS: Record<string, string> = {
  full: 'each check with its message and hints',
  names: 'the names of the checks',
  score: 'your points only',
  off: 'nothing (checking is off)'
};

function day(iso: string): string {
  const date = new Date(iso);
  return isNaN(date.getTime())
    ? iso
    : date.toLocaleDateString(undefined, { day: 'numeric', month: 'short', year: 'numeric' });
}

/** ``text`` into ``node``, each `name` in backticks shown as code (never parsed as HTML). */
function withCode<T extends HTMLElement>(node: T, text: string): T {
  text.split('`').forEach((part, i) => {
    if (part) {
      node.append(i % 2 ? el('code', 'tc-code', part) : document.createTextNode(part));
    }
  });
  return node;
}

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className = '',
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}
